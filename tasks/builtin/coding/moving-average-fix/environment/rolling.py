def moving_average(values, window):
    """Return the average of every run of `window` consecutive values, in order, as floats.

    moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]
    A window longer than the input gives []. A window smaller than 1 raises ValueError.
    The input (any sequence of numbers) is not modified.
    """
    result = []
    for i in range(len(values) - window):
        chunk = values[i:i + window]
        result.append(sum(chunk) // window)
    return result
