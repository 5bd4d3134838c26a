from gormes.cli.main import main

main()
