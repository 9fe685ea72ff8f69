"""toolbus nats adapter."""
