"""The task's path through one box: intake, the durable store and the task's lifecycle, the
scheduler and the executor.
"""
