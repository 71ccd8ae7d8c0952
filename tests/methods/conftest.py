# The toy method registers its names when imported: only the fresh processes of its test import it, never the
# doctest collection of this session.
collect_ignore = ["toy_method"]
