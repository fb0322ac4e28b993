"""What the daemon tells its operator: Prometheus metrics and health, logs, catch-up progress."""
