"""Execution: planning against the store, the scheduler, backends, and the events they emit."""
