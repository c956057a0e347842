"""The HTTP server: ``create_app(store_url)`` gives the ASGI app that ``keepstate serve`` runs."""

from .app import create_app

__all__ = ["create_app"]
