"""The `agent` job: a run driven as a durable job.

`handler` is the job handler (each attempt a run, resumed where the last one
stopped); `attempts` reads which run each attempt drove; `cut_off` ends the runs
of an attempt that was lost; `tokens` counts what earlier attempts spent but
never gave the job; `install` hands a worker the handler and the cut-off sweep.
"""
