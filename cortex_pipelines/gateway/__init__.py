"""`cortex serve`: the HTTP gateway that connectors use to hand in messages and fetch replies."""
