"""The path of one search: the query embedded, the store searched (by vector, words or
both), the candidates ranked and arranged into a page, with its facets and experiment."""
