"""Tests of warren_worker against the real RabbitMQ and a real warren server."""
