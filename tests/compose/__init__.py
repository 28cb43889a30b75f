"""The docker-compose stack under a real engine (``make test-compose``)."""
