"""The cron actor: one stream per schedule. `rules` holds the pure schedule
logic (parse, fire times, `evolve`/`decide`); `scheduler` drives it over the
event store and submits each occurrence as a job."""
