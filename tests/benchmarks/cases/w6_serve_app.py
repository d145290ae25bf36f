"""The Dask peer's W6 server: the saved model and scaler behind POST /predict (uvicorn + Starlette)."""

import os
import pickle

import pandas as pd
import xgboost as xgb
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

FEATURES = ["passenger_count", "trip_distance", "fare_amount", "trip_duration", "hour", "day_of_week"]
SCALED = ["trip_distance", "trip_duration"]  # as in w6_common (not imported: it loads airflowless)
FOLDER = os.environ["W6_MODEL_DIR"]
booster = xgb.Booster()
booster.load_model(os.path.join(FOLDER, "model.ubj"))
with open(os.path.join(FOLDER, "scaler.pkl"), "rb") as f:
    scaler = pickle.load(f)


async def predict(request: Request) -> JSONResponse:
    body = await request.json()
    frame = pd.DataFrame(body if isinstance(body, list) else [body])[FEATURES]
    frame[SCALED] = scaler.transform(frame[SCALED])
    return JSONResponse({"predictions": booster.inplace_predict(frame).tolist()})


app = Starlette(routes=[Route("/predict", predict, methods=["POST"])])
