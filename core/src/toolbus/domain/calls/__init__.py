"""What a call is: wire envelope, queue names, argument options, tool names, trace context."""
