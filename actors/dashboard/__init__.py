"""The dashboard (``/dashboard/``): server-rendered pages over a chat's memory, conversation,
cost and health, for the operator (``DASHBOARD_TOKEN``) or one person (a one-time link scoped to
their chat). Logins and sessions are :mod:`actors.dashboard.auth`, plots
:mod:`actors.dashboard.svg`, the pages :mod:`actors.dashboard.pages`, the live feed
:mod:`actors.dashboard.feed`. What the pages read and change is :mod:`memory`'s (the same
functions the chat commands call)."""
