"""lora package."""
