"""The path of one photo: read and decode, embed, write with its payload, its near-duplicate
group and tags, or a recorded reason it was skipped."""
