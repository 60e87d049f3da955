"""What the API accepts and answers: the pydantic models of its requests and responses."""
