"""The analysis stage: a build session loads BUILD targets and turns them into ``ExecutorStep``s.

``session`` (workspace, settings, backend, load and analyse), ``analyze`` (loaded targets become steps; ``RuleContext``
is what a rule's implementation receives) and ``build`` (the flow of one ``marinbuild build`` through a session,
returned as data)."""
