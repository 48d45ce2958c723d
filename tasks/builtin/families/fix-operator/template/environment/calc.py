def {{fname}}(a, b):
    return {{body}}
