"""`gormes top`: a live terminal view of the workforce.

model.py (typed snapshot, pure), read.py (the snapshot out of the projection
tables), keys.py (keys as pure state transitions), render.py (rich renderables,
pure), app.py (the trio loop on the terminal).
"""
