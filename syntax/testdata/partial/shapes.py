# Shapes of Python classes and functions that the statement splitter must
# split right or keep whole; TestPartialParseMatchesWhole compares every
# pattern's matches here with a whole-file parse.
import os


def top(a, b=len("x")):
    """Doc."""
    x = a == a
    if x:
        print(a)
    else:
        print(b)
    return [i for i in range(3)]


def one_line(a): return a if a else None


async def fetch(url):
    async with open(url) as f:
        data = await f.read()
    return data


@decorator(1)
def decorated(
    a,
    b,
):
    def inner(c):
        return c(a)
    return inner(b)


class Base(object):
    """A class."""

    attr = os.path.join("a", "b")

    def __init__(self, x):
        self.x = x
        self.y = x == x

    @property
    def value(self):
        return self.x

    @staticmethod
    async def run(y):
        try:
            await y()
        except ValueError:
            pass
        finally:
            y.close()

    def nested(self):
        def helper(z):
            return z.strip()
        return helper(self.x)

    class Inner:
        def m(self): return self.z

    def odd(self):
        if self.x:
          return 1
        return 2


class Empty: pass


class Tabbed:
	def t(self):
		self.q = print(1)
