"""Who may call what: group access checks and permission rules."""
