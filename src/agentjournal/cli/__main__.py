from agentjournal.cli import main

main()
