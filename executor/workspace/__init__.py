"""A session's files as data (DESIGN.md §9): trees and blobs in PostgreSQL,
each executor host's volume a cache of them.

- ``tree``: the tree format and its hash (the same bytes as SQL's shell.tree_hash);
- ``cache``: what a host knows about its copy of a session (its index);
- ``capture``: after a command, store what it changed and build the new root;
- ``restore``: before a command, bring a host's copy to the session's root.
"""
