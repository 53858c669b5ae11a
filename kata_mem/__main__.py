from kata_mem.interfaces.main import run

run()
