"""The alert notifier: the real-time alerts topic, delivered to webhooks, Teams and Slack."""
