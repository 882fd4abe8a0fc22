"""Opt-in interoperability checks: lockgate against the real agents people run.

Nothing here is collected by the test suite (`pytest` runs `tests/`); each check is run by
hand (`python -m interop.agents.run`) and may install third-party programs from a package
registry into a cache folder outside the repository.
"""
