"""Storage adapters: everything that reads or writes the prefix goes through here (fsspec)."""
