"""Dev-only generator of ``firmware_profiles/*.json``, run by ``tools/build_profiles.py``.

One concern per module; every number in a profile traces to a commented line in one:

- ``figures``: figure objects (fig/est/zero/derive) and the source citations they name
- ``data``: the public data set in ``tools/profile_data/`` (devices.json, CSV tables)
- ``devices``: shared device, board and profile builders; CPU peaks from core clusters
- ``boards_arm``, ``boards_jetson``, ``boards_accel``, ``boards_fpga``, ``boards_x86``:
  one builder per board, grouped by family
- ``latency_rows``: the row object and model/precision names the importers share
- ``latency_devices_json``, ``latency_tables``: latency rows from devices.json and from
  the per-source CSV tables
- ``efficiency``: efficiency derived from a device's own latency row
- ``build``: every profile document, in order
"""
