"""headrace."""
