"""The job actor: one stream `job-<id>` per job, and what drives it.

`state` folds a job's events (`evolve`), `rules` decides its commands (`decide`);
`queue` (with `batch` and `admin` mixed in) runs each command as one
read-decide-append transaction through `session`; `worker` claims and runs jobs
with `handlers`, renewing `leases`, writing its `heartbeat`, sized by the
`governor`; `completions` groups concurrent completions; `views` are the typed
rows the queue returns; `context` is what a running handler gets as `ctx`.
"""
