"""Tests of the lab: the scenario runner, the replay and the scripted server."""
