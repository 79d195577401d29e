"""The cluster commands: ``marinbuild submit`` (``submit.py``) and ``marinbuild jobs`` (``jobs.py``) on a Ray cluster
whose address ``config.py`` finds from its ``infra/*.yaml``. The token check they share with the Ray backend is
``marinbuild.run.ray_auth``, one layer down."""
