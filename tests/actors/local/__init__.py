"""Tests of actors/local: the local chats of ``engram chat`` (frames, token, terminal, the
sender's local transport, drafts); the real server and client: tests/e2e/test_chat_outside.py."""
