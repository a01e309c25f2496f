"""What the box measures about itself: telemetry samples, energy meters, load forecasts, grid
carbon.
"""
