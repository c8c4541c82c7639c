"""Task domains: the ``Domain`` contract and its optional capabilities (``base``), the registry that maps
a config's ``domain:`` name to a domain (``registry``), and the built-in worlds (``arith``, ``math``)."""
