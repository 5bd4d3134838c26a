"""Read models folded from the event log, and the runner that keeps them current.

    from gormes.projections.runner import ProjectionRunner
    from gormes.projections.streams import streams

    async with SQLiteEventStore.open(path) as store:
        runner = ProjectionRunner(store, streams)
        nursery.start_soon(runner.run)
        ...
        await runner.wait(result.last_position)   # read your writes
"""
