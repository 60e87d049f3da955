"""Images over HTTP: what a search by image sends or names, the fetch of an image URL, and
the photos' own pixels, on threads of their own."""
