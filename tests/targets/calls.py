"""A known program: tests assert its exact call tree.  Keep the lines fixed:
tests check first line numbers."""
import math


class Point:
    def __init__(self, x, y):  # line 7
        self.x = x
        self.y = y

    def norm(self):  # line 11
        return math.sqrt(self.x * self.x + self.y * self.y)


def leaf(i):  # line 15
    return i * 2


def branch(n):  # line 19
    total = 0
    for i in range(n):
        total += leaf(i)
    return total


def numbers(n):  # line 26
    for i in range(n):
        yield i


def consume():  # line 31
    return sum(numbers(3))


def program():  # line 35
    branch(2)
    p = Point(3, 4)
    p.norm()
    consume()
    items = []
    items.append(len("abc"))
    {}.get("k")
    return items


def level3():  # line 46
    raise ValueError("deep")


def level2():
    level3()


def level1():
    level2()


def catcher():
    try:
        level1()
    except ValueError:
        pass
    return leaf(1)


def recurse(n):
    if n == 0:
        return 0
    return recurse(n - 1) + 1
