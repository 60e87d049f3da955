"""`photosearch up`: the whole system on one machine, for a first look and for development."""
