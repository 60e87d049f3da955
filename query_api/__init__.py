"""The query API: FastAPI text and image search (issue 4)."""
