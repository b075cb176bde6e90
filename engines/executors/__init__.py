"""Executors run the batches the engine core schedules: the performance model in real time, a
null executor, and the torch executor. They never make scheduling decisions."""
