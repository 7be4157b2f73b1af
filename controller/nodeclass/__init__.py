"""EC2NodeClass controllers: the resolved status, the finalizer and cleanup of what karpy made for a class."""
