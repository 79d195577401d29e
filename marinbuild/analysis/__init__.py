"""The analysis stage: a build session loads BUILD targets and turns them into ``ExecutorStep``s.

``session`` (workspace, settings, backend, load and analyse), ``analyze`` (loaded targets become
steps; ``RuleContext`` is what a rule's implementation receives), ``snapshot`` (a no-op build
answered from what the previous run recorded) and ``build`` (the flow of one ``marinbuild build``,
from the snapshot or through a session, returned as data). This package imports nothing itself, so
that the no-op path (``build``, ``snapshot`` and ``session.Settings``) does not pull in the loader or the engine.
"""
