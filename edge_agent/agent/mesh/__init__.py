"""The daemon's side of the peer mesh: membership, offloading its own tasks, serving peers'
tasks, the hub's moves.
"""
