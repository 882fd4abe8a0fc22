"""lockgate: a provider boundary for tool-using agents.

A complete, validated response can request an action. An incomplete response cannot
accidentally execute one.
"""

__version__ = "0.1.0"
