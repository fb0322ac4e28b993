"""A lake on object storage: the store seam (``store.py``), its in-memory model
(``memory.py``) and the commit protocol that needs no rename."""
