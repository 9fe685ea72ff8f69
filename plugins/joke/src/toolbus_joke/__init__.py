"""toolbus example tool plugin."""
