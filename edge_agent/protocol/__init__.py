"""What the agent and the hub both speak: signing, the hub client, the discovery record.

``hub_auth``: request and answer signatures between an agent and the hub (the mesh's one
signing scheme, ``edge_agent.mesh.credential``) and the hub's discovery proof;
``hub_client``: the agent's HTTP client for the hub protocol (also the hub's tests, simulated
agents and benchmarks); ``hub_discovery``: the ``_hetmesh-hub._tcp`` TXT record, nonces and
the proof check. docs/hub-protocol.md is the specification.
"""
