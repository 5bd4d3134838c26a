"""A gateway client's share of the class's call rate (decision 0082).

The gateways' call rate (`GORMES_GATEWAY_RATE`, gormes/control/call_rate.py,
decision 0072) is one allowance for the whole class: one client calling as fast as
it is told it may takes all of it, and every other client is refused. So each
client also has a share, `GORMES_GATEWAY_CLIENT_RATE`, in addition to the class's
limit, never instead of it: a call is admitted only if both have room. Unset, the
share is a quarter of the class's calls in the class's window (`150rpm` of
`600rpm`); `off` turns it off.

A client names itself, so a share is per name and a client that takes new names
takes more shares; every name's calls still count in the class's window, so K
names get at most min(K x share, class) together: what one name could take before
shares existed, never more.

Each admitted call takes a lease of the class's key and one of its client's key
(`share_key`: a digest of the caller's id, so the key is bounded and plain ASCII
whatever the client calls itself), in the one transaction that looks at both.
The client's lease is the class lease's twin (its id + `TWIN`): the class's look,
whoever makes it, deletes the twins of the leases leaving the class's window
(`limits_table.delete_twins`), so a client that never calls again leaves nothing,
and the clients' keys together never hold more rows than the class's key. That is
why a share's window may not be longer than the class's.

Pure: the keys and the default; the setting is read in gormes/control/call_rate.py.
"""

from __future__ import annotations

import hashlib
import math

from gormes.control.rate_rules import RateRule

CLIENT_RATE_ENV = "GORMES_GATEWAY_CLIENT_RATE"
# Unset, a client's share is the class's calls divided by this, in the class's window.
SHARE_DIVISOR = 4
TWIN = "/share"  # a client lease's id: its class lease's id and this


def share_key(class_key: str, caller_id: str) -> str:
    """The lease key of one client's share: `calls:gateway:` and 32 hex digits of the
    caller's id (a client's name is its own, up to 200 characters of anything, a lone
    surrogate included; the key is 46 ASCII characters whatever it is)."""
    digest = hashlib.sha256(caller_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{class_key}:{digest}"


def default_share(rule: RateRule) -> RateRule:
    """A quarter of the class's calls (rounded up, at least one) in its window."""
    assert rule.requests is not None
    return RateRule(pattern=rule.pattern, requests=max(1, math.ceil(rule.requests / SHARE_DIVISOR)),
                    window_s=rule.window_s)
