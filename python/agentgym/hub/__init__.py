"""``agentgym hub``: a local web app over run directories (runs, live curves, trajectory replay).

``runs`` reads run directories, ``server`` answers the JSON API and serves the pages in
``static/`` (plain HTML, CSS and JS; curves drawn with plotly.js from the ``plotly`` package).
"""
