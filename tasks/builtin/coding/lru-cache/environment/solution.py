class LRUCache:
    def __init__(self, capacity: int):
        raise NotImplementedError
