"""The cluster commands: ``marinbuild submit`` and ``marinbuild jobs`` on a Ray cluster.

``config.py`` finds a cluster's address from its ``infra/*.yaml`` config, ``jobs.py`` lists, follows and stops
its jobs through Ray's job SDK, ``submit.py`` sends a command to it as a job. The token check they share with
the Ray backend is ``marinbuild.run.ray_auth``, one layer down, since the backend connects with it too.
"""
