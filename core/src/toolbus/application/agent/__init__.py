"""The agent side: sessions, their audit records, configured hooks and code hooks at run time."""
