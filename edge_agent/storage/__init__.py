"""SQLite storage shared by the agent and the hub: the writer, migrations, integrity, repair.

``db``: one writer thread with group commit and a reader pool (``Database``), numbered
migrations (``Migration``, ``migrate``), ``StoreError`` and ``persist``'s retry; ``integrity``:
the existence marker and ``quick_check`` before a file is opened; ``salvage``: ``edge-agent
repair`` / ``cloud-hub repair``; ``agent_schema``: the agent database's tables, which the
agent writes and the load predictor's ClientApp reads (``telemetry``). Nothing here knows
the agent daemon or the hub.
"""
