"""The proactive lane: engram speaks first, at the right moment (seed 000 "Proactive Messaging").

``routine`` — what a routine is (its rule, its brief) and the inbox row that carries a due run
to the chat's actor, so a routine is ordered with the person's messages and never runs beside a
turn.
"""
