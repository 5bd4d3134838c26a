"""`gormes trace RUN`: a recorded run as OpenTelemetry spans, sent after the fact.

The spans are derived from the log (gormes/telemetry/spans.py), with ids derived
from the run's id and seqs, so tracing a run twice sends the same spans. With an
OTLP endpoint configured (`--endpoint`, `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) they are sent there; without one they are
only printed. `--json` prints them as JSON (and still sends when configured).
"""

from __future__ import annotations

from typing import Any

import click
import msgspec


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--children", is_flag=True, help="Also the runs it spawned, recursively.")
@click.option("--endpoint", metavar="URL",
              help="OTLP/HTTP traces URL (http://host:4318/v1/traces); default from "
              "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT.")
@click.option("--json", "as_json", is_flag=True,
              help="Print {trace_id, sent, endpoint, spans} as JSON.")
@click.pass_obj
def trace(obj: Any, run_id: str, children: bool, endpoint: str | None, as_json: bool) -> None:
    """Export a recorded run as OpenTelemetry spans over OTLP/HTTP.

    A span per run (subagents' nested under their parent's with --children), per
    model turn (gen_ai.* attributes, tokens), per failed model attempt and per
    tool call; a run of an agent job comes with its job attempt's span. Without
    an endpoint configured nothing is sent: the spans are printed.
    """
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import trio

    from gormes.errors import GormesError
    from gormes.events.catalog import load_all
    from gormes.events.open import open_store
    from gormes.telemetry import otlp_config
    from gormes.telemetry.read import run_trace

    load_all()

    async def read() -> list[Any]:
        async with open_store(obj.target, readonly=True) as store:
            return await store.read_with(
                lambda log: run_trace(log, run_id, children=children, with_attempt=True))

    spans = trio.run(read)
    sent = False
    where = otlp_config.endpoint_shown(endpoint) if otlp_config.configured(endpoint) else None
    if where is not None:
        # Lazy: the OpenTelemetry SDK only when there is somewhere to send.
        from gormes.telemetry.otlp import SpanSender

        sender = SpanSender(endpoint)
        try:
            sent = sender.send(spans)
        finally:
            sender.close()
        if not sent:
            raise GormesError(f"the collector at {where} did not take the {len(spans)} span(s): {sender.failure}")
    if as_json:
        click.echo(msgspec.json.encode({
            "trace_id": spans[0].trace_id, "sent": sent, "endpoint": where, "spans": spans,
        }).decode())
        return
    _print_tree(spans)
    if sent:
        click.echo(f"sent {len(spans)} span(s) of trace {spans[0].trace_id} to {where}")
    else:
        click.echo(f"not sent: {otlp_config.why_not_sent()}; trace {spans[0].trace_id}, {len(spans)} span(s)")


def _print_tree(spans: list[Any]) -> None:
    known = {s.span_id for s in spans}
    below: dict[str | None, list[Any]] = {}
    for span in spans:
        parent = span.parent_span_id if span.parent_span_id in known else None
        below.setdefault(parent, []).append(span)

    def show(span: Any, depth: int) -> None:
        ms = (span.end_ns - span.start_ns) / 1e6
        tokens = ""
        a = span.attributes
        if "gen_ai.usage.input_tokens" in a:
            tokens = f"  tokens {a['gen_ai.usage.input_tokens']} in, {a['gen_ai.usage.output_tokens']} out"
        status = f"  {span.status}: {span.status_message}" if span.status == "error" else ""
        click.echo(f"{'  ' * depth}{span.span_id}  {span.name}  {ms:.1f} ms{tokens}{status}")
        for child in below.get(span.span_id, []):
            show(child, depth + 1)

    for root in below.get(None, []):
        show(root, 0)
