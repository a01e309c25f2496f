"""The daemon's link to the cloud hub: finding it, enrolment and heartbeats, device reports, the
load model.
"""
